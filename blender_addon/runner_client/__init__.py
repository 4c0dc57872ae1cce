"""The add-on's side of the runner, pure Python (no bpy, no threads unless said): where the
runner lives, the job description and its command line, the subprocess, its events checked at
the boundary, and the job and batch state they make."""
