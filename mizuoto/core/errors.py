"""Errors a user can act on.

Everything raised for bad input derives from `MizuotoError` and carries a one-line message that says
what to change. The CLI prints it as one line and exits with status 2; ComfyUI shows it in its error
dialog. Anything else escaping is a bug in Mizuoto, not a user error.
"""


class MizuotoError(Exception):
    """A problem the user can fix; the message is one line naming what to change."""

    def __init__(self, message: str):
        # A message that spans lines reads as a stack trace in a terminal and in ComfyUI's dialog.
        super().__init__(" ".join(str(message).split()))


class SettingsError(MizuotoError, ValueError):
    """A setting has an unknown key or a value outside the allowed ones."""


class InputError(MizuotoError, ValueError):
    """A request's input (text, audio, seed, path, policy) cannot be used."""


class CheckpointError(MizuotoError):
    """A model file is missing, unreadable, or belongs to another engine."""


class Cancelled(MizuotoError):
    """The request was cancelled between two steps; the model stays usable."""
