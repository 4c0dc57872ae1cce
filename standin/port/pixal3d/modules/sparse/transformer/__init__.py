from .modulated import *
