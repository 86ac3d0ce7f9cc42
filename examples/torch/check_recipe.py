#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that docs/11_pytorch.md's recipe is code as it is written.

The ```cpp blocks of its section "The recipe, step by step", in their order
and nothing else, must compile as one C++ file against torch's and loom's
headers with the flags of loom_torch.extension_flags (the compiler's
-fsyntax-only: every name they use is defined in them), and each ```python
block of the page must be an excerpt of a file in examples/torch/ (blanks
collapsed, as cmake/check_doc_snippets.cmake compares C++ blocks).

Usage: check_recipe.py [CXX]. Exits 0 when both hold, 1 when one does not
(with the compiler's messages or the block), 77 when torch cannot be imported.
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile

try:
    from torch.utils import cpp_extension
except ImportError as e:
    print(f"torch cannot be imported ({e}): the recipe check is skipped")
    sys.exit(77)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import loom_torch  # noqa: E402

DOC = HERE.parent.parent / "docs" / "11_pytorch.md"


def blocks(text, language):
    return re.findall(r"^ *```" + language + r"\n(.*?)^ *```", text, flags=re.S | re.M)


def normalized(text):
    return "\n" + "\n".join(" ".join(line.split()) for line in text.splitlines()) + "\n"


def main():
    doc = DOC.read_text()
    start = doc.index("### The recipe, step by step")
    recipe = doc[start:doc.index("\n### ", start + 1)]
    cpp = blocks(recipe, "cpp")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        source = pathlib.Path(tmp) / "recipe.cpp"
        source.write_text("\n".join(cpp))
        flags = loom_torch.extension_flags(loom_torch._cuda_home())
        includes = flags["extra_include_paths"] + cpp_extension.include_paths()
        command = [sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CXX", "c++"), "-fsyntax-only",
                   *(f for f in flags["extra_cflags"] if not f.startswith("-O")), *(f"-I{i}" for i in includes),
                   str(source)]
        compiled = subprocess.run(command, capture_output=True, text=True)
        if compiled.returncode != 0:
            failures.append(f"the recipe's {len(cpp)} C++ blocks do not compile as one file:\n{compiled.stderr}")
        else:
            print(f"ok    the recipe's {len(cpp)} C++ blocks compile as one file")
    corpus = "".join(normalized(p.read_text()) for p in sorted(HERE.glob("*.py")))
    python = blocks(doc, "python")
    missing = [b for b in python if normalized(b.strip("\n")) not in corpus]
    failures += [f"a python block is not an excerpt of examples/torch/*.py:\n{b}" for b in missing]
    if not missing:
        print(f"ok    the page's {len(python)} python blocks are excerpts of examples/torch/*.py")
    for f in failures:
        print("FAIL  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
