"""Blender in background mode (``headless.py``): one image or a folder, synchronously, the
checks made before the runner starts, and the preview render."""
