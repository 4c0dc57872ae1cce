"""The batch manifest's file name and format version, written once: the manifest
(``runner.manifest``) and its recovery from the folder (``runner.manifest_recovery``) both
write manifests of this version."""

MANIFEST = "manifest.json"
"""The manifest's file name in a batch's output folder."""
MANIFEST_VERSION = 1
"""The manifest format this runner writes; a manifest of a higher version is a newer runner's
(``manifest_newer``)."""
