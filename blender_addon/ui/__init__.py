"""The add-on inside Blender: registration, the panel, operators, preferences, the job
controller driven by a timer, and the glTF import. Needs ``bpy``."""
