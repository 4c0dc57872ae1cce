"""Errors the built-in backend raises for input it cannot turn into a mesh.

Each carries a ``hint`` (what the user should do) besides its message, so the runner can map it
to an ``error`` event (``kind``, ``message``, ``hint``) without a traceback.
"""


class BuiltinBackendError(Exception):
    """Base class: the image is valid but silhouette inflation cannot make a mesh from it.

    Attributes:
        kind: short machine name for the runner's ``error`` event (e.g. ``"empty_matte"``).
        hint: one sentence telling the user what to do.
    """

    kind = "builtin_failed"

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}"


class EmptyMatteError(BuiltinBackendError):
    """The matte (the character's silhouette) is empty or too small to inflate.

    Raised for a fully transparent image, or when keying the border colour leaves (almost)
    nothing, e.g. a plain image of one colour.
    """

    kind = "empty_matte"


class BackgroundNotPlainError(BuiltinBackendError):
    """The image has no alpha channel and its border is not one plain colour to key out."""

    kind = "background_not_plain"
