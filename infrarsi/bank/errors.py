"""The bank's errors: each message names the file and the fix."""

class BankError(RuntimeError):
    """A bank that cannot be used or a record that cannot be stored; the message says the fix."""


class BankCorruptError(BankError):
    pass


class BankSchemaError(BankError):
    pass


class BankConflictError(BankError):
    pass
