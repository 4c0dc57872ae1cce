"""The product's facts, written once and shared by every process: byte units, the Pixal3D
choices, the options table, the error kinds, the event schema and a process's limits in words.

Standard library only, and relative imports inside, so the runner, stageload, the export engine
and the Blender add-on (which must keep torch out of Blender's process) all import it by name.
"""
