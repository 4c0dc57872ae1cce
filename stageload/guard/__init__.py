"""The guard: start one heavy command only when there is room, stop it before swap runs away.

Public API (docs/ARCHITECTURE.md, "Guard API"; user documentation in docs/guard.md):
``GuardConfig``, ``add_guard_arguments``, ``Guard``, the exit codes, and the pure decision
functions ``decide_admission`` / ``Budget`` for callers that gather readings themselves.
Importing this package imports psutil but never torch.
"""
from meshfacts.units import format_size, parse_size

from .admission import Verdict, decide_admission
from .amount import Amount, parse_amount
from .budget import Budget
from .config import ConfigError, GuardConfig, add_guard_arguments
from .guard import EXIT_CANNOT_START, EXIT_SIGNAL_BASE, EXIT_STOPPED, EXIT_TIMEOUT, Guard
from .peers import register_entry_point
from .process_tree import ProcessTree, StopReport

__all__ = [
    "Amount", "Budget", "ConfigError", "EXIT_CANNOT_START", "EXIT_SIGNAL_BASE", "EXIT_STOPPED",
    "EXIT_TIMEOUT", "Guard", "GuardConfig", "ProcessTree", "StopReport", "Verdict",
    "add_guard_arguments", "decide_admission", "format_size", "parse_amount", "parse_size",
    "register_entry_point",
]
