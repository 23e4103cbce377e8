"""The exit codes of every `infrarsi` command: stable, documented in docs/cli.md, for scripts to branch on.

    0  OK            done: a candidate was promoted (run, tune), applied (apply), or the command did its job
    1  ERROR         a failure, explained in one line on stderr (a dirty repository, a crash, a broken record)
    2  USAGE         bad usage: an unknown flag, a missing argument, a value out of range
    3  NO_PROMOTION  the run finished but nothing beat the baseline by more than the noise (nothing to apply)
  130  INTERRUPTED   Ctrl-C (SIGINT): what finished is recorded; the command to resume is printed
"""

OK = 0
ERROR = 1
USAGE = 2
NO_PROMOTION = 3
INTERRUPTED = 130

MEANING = {OK: "done (promoted / applied)", ERROR: "error", USAGE: "usage", NO_PROMOTION: "finished without a promotion",
           INTERRUPTED: "interrupted"}
