#!/usr/bin/env python3
"""Runs a command on a pseudo-terminal (its stdin, stdout and stderr), copying what it
writes there to our stdout: the tests of the progress line (base/progress.h) see what
a person at a terminal would. Output post-processing is off (no "\n" -> "\r\n"), so
every "\r" in the copy is the command's own. SIGTERM and SIGINT are passed on; the
exit code is the command's (128 + signal when a signal ended it).

    on_terminal.py outboxd cleanup --pg ... > copy.log
"""
import os
import pty
import signal
import sys
import termios


def main():
    pid, fd = pty.fork()
    if pid == 0:
        attrs = termios.tcgetattr(1)
        attrs[1] &= ~termios.OPOST
        termios.tcsetattr(1, termios.TCSANOW, attrs)
        os.execvp(sys.argv[1], sys.argv[1:])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _frame: os.kill(pid, s))
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the command closed the terminal (it ended)
            break
        if not data:
            break
        os.write(1, data)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
