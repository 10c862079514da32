"""zeroshard.Error: what the library and the servers answer, in Python."""


class Error(Exception):
    """A failed zeroshard call: `code` is gRPC's canonical status code (an
    int, 3 for INVALID_ARGUMENT ...), `code_name` its name and `message`
    the server's or the library's message."""

    def __init__(self, code, message):
        from ._lib import CODE_NAMES
        self.code = int(code)
        self.code_name = CODE_NAMES.get(self.code, "UNKNOWN_CODE")
        self.message = message
        super().__init__(f"{self.code_name}: {message}")
