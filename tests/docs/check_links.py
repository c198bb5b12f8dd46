#!/usr/bin/env python3
"""Every link of the repository's Markdown resolves: a relative link names a file or
folder that is in the tree, and a #fragment names a heading of the page it points to
(GitHub's anchors: lower case, punctuation dropped, spaces as dashes, -1, -2 for
repeats). Code, comments and manifests that point at a page's section the same way
(`docs/operations.md#slot-trouble`) are checked too. Fenced code blocks are skipped.

    tests/docs/check_links.py [SOURCE_DIR]     # default: this checkout
"""
import pathlib
import re
import subprocess
import sys

from doc_check import finish

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
# A page and section named outside Markdown: README.md#quickstart, docs/deploy.md#docker-and-compose.
CITED = re.compile(r"((?:\.\./)*(?:README|docs/[a-z0-9_-]+)\.md)#([a-z0-9_-]+)")


def prose(text):
    """The lines of `text` outside fenced code blocks, with their numbers."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        marker = re.match(r"\s*(```|~~~)", line)
        if marker:
            fence = None if fence == marker.group(1) else fence or marker.group(1)
            continue
        if fence is None:
            yield number, line


def slug(heading):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for _, line in prose(path.read_text(encoding="utf-8")):
            heading = re.match(r"(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not heading:
                continue
            base = slug(heading.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        for explicit in re.findall(r'<a (?:name|id)="([^"]+)"', path.read_text(encoding="utf-8")):
            found.add(explicit)
        cache[path] = found
    return cache[path]


def check_target(src, page, target, where, problems):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
        return
    file_part, _, fragment = target.partition("#")
    dest = page if not file_part else (page.parent / file_part).resolve()
    if not dest.exists():
        problems.append(f"{where}: {target}: no such file in the repository")
        return
    try:
        dest.relative_to(src)
    except ValueError:
        problems.append(f"{where}: {target}: points outside the repository")
        return
    if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
        problems.append(f"{where}: {target}: {dest.relative_to(src)} has no heading #{fragment}")


def main():
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[2])
    src = src.resolve()
    files = subprocess.run(["git", "-C", str(src), "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
    problems, links = [], 0
    for name in files:
        path = src / name
        if not path.is_file():
            continue
        if name.endswith(".md"):
            # Fenced lines blanked, so that a link's text may run over a line break.
            lines = path.read_text(encoding="utf-8").split("\n")
            kept = dict(prose("\n".join(lines)))
            text = "\n".join(kept.get(n, "") for n in range(1, len(lines) + 1))
            for link in LINK.finditer(text):
                links += 1
                number = text.count("\n", 0, link.start()) + 1
                check_target(src, path, link.group(1), f"{name}:{number}", problems)
        elif path.suffix in {".h", ".cc", ".py", ".sh", ".mjs", ".yaml", ".yml", ".toml", ".json",
                             ".jq", ".txt", ".proto", ""}:
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.split("\n"), 1):
                for page, fragment in CITED.findall(line):
                    links += 1
                    target = src / page.lstrip("./") if page.startswith("../") else src / page
                    check_target(src, target, "#" + fragment, f"{name}:{number}", problems)
    finish(problems, f"ok: {links} links in {len(files)} files resolve")


if __name__ == "__main__":
    main()
