#!/usr/bin/env python3
"""Checks the documentation's links: every relative link of README.md and
docs/*.md names a file of the repository, and every #anchor a heading of
the page it points at (GitHub's anchors: lower case, punctuation dropped,
spaces as hyphens).

  scripts/check_docs.py [--root DIR]

Exits 1, listing each broken link as FILE: LINK, when one is.
"""
import argparse
import glob
import os
import re
import sys

HEADING = re.compile(r"^#+ (.*)$", re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchor(heading):
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    root = os.path.abspath(parser.parse_args().root)
    pages = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    texts = {}
    for page in pages:
        with open(page, encoding="utf-8") as f:
            texts[page] = FENCE.sub("", f.read())
    anchors = {page: {anchor(h) for h in HEADING.findall(text)} for page, text in texts.items()}
    broken = []
    for page, text in texts.items():
        for link in LINK.findall(text):
            if re.match(r"^[a-z]+:", link):
                continue  # https:, mailto:
            path, _, fragment = link.partition("#")
            target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            shown = f"{os.path.relpath(page, root)}: {link}"
            if not os.path.exists(target):
                broken.append(f"{shown}: no such file")
            elif fragment and target.endswith(".md") and fragment not in anchors.get(target, set()):
                broken.append(f"{shown}: no heading #{fragment}")
    for line in broken:
        print(line, file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
