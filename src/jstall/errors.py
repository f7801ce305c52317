"""The one error type the command line turns into a one-line message."""


class JstallError(Exception):
    """A problem the user can fix; str() is one line that names the fix."""
