"""One guarded job in the supervisor: its records, what it starts from, its steps (``JobRun``),
its child processes, outputs, claims, trace, memory and cancel."""
