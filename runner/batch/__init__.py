"""A folder of images, one guarded job each (:mod:`.folder`), and its resumable manifest
(:mod:`.manifest`, rebuilt from the folder by :mod:`.recovery` when it is damaged or lost).

The manifest's file name and format version are written here, once: both the manifest and its
recovery write manifests of this version."""

MANIFEST = "manifest.json"
"""The manifest's file name in a batch's output folder."""
MANIFEST_VERSION = 1
"""The manifest format this runner writes; a manifest of a higher version is a newer runner's
(``manifest_newer``)."""
