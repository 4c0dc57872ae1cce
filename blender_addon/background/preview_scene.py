"""The headless preview's scene: a camera framing the imported object, a sun, a light-grey world
and Workbench showing the base-colour texture as the picture's own colours (``headless.py``
renders it). Takes ``bpy`` and ``mathutils`` as arguments, so importing it needs neither."""
from __future__ import annotations

import math


def setup_preview(obj, resolution: int, bpy, mathutils) -> None:
    """Camera framing ``obj`` from the front, a little from the left and above (distance: its
    bounding sphere fills the field of view, tightened by 10 % because a character does not
    reach its box's corners), a sun light (for a later Eevee/Cycles render of the .blend), a
    light-grey world, and Workbench with the base-colour texture (renders without a GPU).

    Colours: the texture is shown as the picture's own sRGB values — the **Standard** view
    transform (Blender 4.x's default AgX compresses and desaturates: a yellow tiger turned
    olive) and **flat** lighting (Workbench's studio light shades every surface, darkening the
    mean by about 30 %). Measured on the goblin: AgX + studio gave 0.62-0.66 of the picture's
    matte mean colour, Standard + flat 0.93-1.06 (tests/blender/test_headless.py)."""
    scene = bpy.context.scene
    corners = [obj.matrix_world @ mathutils.Vector(c) for c in obj.bound_box]
    lo = mathutils.Vector(tuple(min(c[i] for c in corners) for i in range(3)))
    hi = mathutils.Vector(tuple(max(c[i] for c in corners) for i in range(3)))
    center, radius = (lo + hi) / 2, max((hi - lo).length / 2, 1e-3)
    cam_data = bpy.data.cameras.new("Preview Camera")
    cam_data.lens = 50.0
    cam = bpy.data.objects.new("Preview Camera", cam_data)
    scene.collection.objects.link(cam)
    # glTF +Z (the character's front) is Blender's -Y: look from -Y, a little from the left/above
    # (the built-in mesh's sides carry stretched edge colours, so a steeper angle shows more of
    # them than of the picture).
    direction = mathutils.Vector((-0.2, -1.0, 0.1)).normalized()
    fov = 2 * math.atan(cam_data.sensor_width / 2 / cam_data.lens)
    cam.location = center + direction * (radius / math.sin(fov / 2) * 0.9)
    cam.rotation_euler = (-direction).to_track_quat("-Z", "Y").to_euler()
    scene.camera = cam
    sun_data = bpy.data.lights.new("Preview Sun", "SUN")
    sun_data.energy = 3.0
    sun = bpy.data.objects.new("Preview Sun", sun_data)
    sun.rotation_euler = (math.radians(50), 0, math.radians(-30))
    scene.collection.objects.link(sun)
    if scene.world is None:
        scene.world = bpy.data.worlds.new("World")
    scene.world.color = (0.8, 0.8, 0.8)
    scene.render.engine = "BLENDER_WORKBENCH"
    scene.display.shading.light = "FLAT"
    scene.display.shading.color_type = "TEXTURE"
    scene.view_settings.view_transform = "Standard"
    scene.view_settings.look = "None"
    scene.view_settings.exposure = 0.0
    scene.view_settings.gamma = 1.0
    scene.render.resolution_x = scene.render.resolution_y = resolution
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = "PNG"
