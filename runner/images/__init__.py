"""Input images: validated and normalised to 8-bit RGBA with Pillow, and why a file that looks
like an image could not be read."""
