#!/usr/bin/env python3
"""Sentences of the docs that once said what the code does not (issue 28 points 11 and
12), checked against what the code says:

- the cleanup summary quoted in the README names the table as `outboxd cleanup` prints
  it for the default --table: `cleanup of outbox`, the table's Display() without a
  schema it was not given (src/pg/table_name.cc), not `public.outbox`;
- no page says a role without REPLICATION streams the backlog: `outboxd run` refuses
  such a role at the start (relay/preflight.cc, CheckReplicationPrivilege);
- every test docs/security.md's "What we tested" cites as `Suite.Name` (or a prefix,
  `Suite.Name...`, `Suite.*`) is a test under tests/: a renamed test once left the
  table citing one that no longer existed.

  tests/docs/check_claims.py SOURCE_DIR
"""
import pathlib
import re
import sys

from doc_check import finish

src = pathlib.Path(sys.argv[1])
pages = [src / "README.md"] + sorted((src / "docs").glob("*.md"))
problems = []

readme = (src / "README.md").read_text()
summaries = re.findall(r"`(cleanup of \S+) done: [^`]*`", readme)
if not summaries:
    problems.append("README.md quotes no cleanup summary (`cleanup of TABLE done: ...`)")
for what in summaries:
    if what != "cleanup of outbox":
        problems.append(f"README.md quotes `{what}`; outboxd cleanup prints `cleanup of outbox`")

for page in pages:
    text = " ".join(page.read_text().split())
    for m in re.finditer(r"without REPLICATION[^.|]*stream", text):
        problems.append(f"{page.relative_to(src)}: says a role {m.group(0)!r}; run refuses it")

security = (src / "docs" / "security.md").read_text()
tested = security[security.index("## What we tested"):]
defined = set()
for source in (src / "tests").rglob("*.cc"):
    defined.update(re.findall(r"\bTEST(?:_F|_P)?\(\s*(\w+),\s*(\w+)\)", source.read_text()))
for suite, name, prefix in re.findall(r"`([A-Z]\w*)\.(\w*)(\.\.\.|\*)?`", tested):
    if not any(s == suite and (n == name or (prefix and n.startswith(name))) for s, n in defined):
        problems.append(f"docs/security.md cites test {suite}.{name}{prefix}, which tests/ lacks")

finish([f"check_claims: {p}" for p in problems], "check_claims: ok")
