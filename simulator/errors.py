"""One error type for every refusal parasim makes.

A `ParasimError` carries a one-line message that names the rule that was broken and the numbers
involved ("dim 1 of size 10 cannot be split 4 ways"). The CLI prints it without a traceback and
the app shows it inline.
"""


class ParasimError(ValueError):
    """Bad input: the message names the rule and the numbers, on one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class ProgramError(ParasimError):
    """A program that cannot run: unmatched send/recv, a deadlock, a mismatched collective."""


class DeviceFailure(RuntimeError):
    """A device stopped while running a program (a real actor death or an injected fault)."""

    def __init__(self, rank: int, instruction: str, reason: str):
        self.rank, self.instruction, self.reason = rank, instruction, reason
        super().__init__(f"device {rank} failed at {instruction}: {reason}")

    def __reduce__(self):  # picklable across Ray actors with its fields
        return (type(self), (self.rank, self.instruction, self.reason))
