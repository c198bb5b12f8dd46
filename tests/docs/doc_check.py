"""What the docs checks share: the end of a run. Each problem on its own line on
stderr and exit 1, or the one `ok` line.

    from doc_check import finish
    finish(problems, f"ok: {links} links resolve")
"""
import sys


def finish(problems, ok_line):
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(ok_line)
