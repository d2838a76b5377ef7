"""Write docs/options.md, the option reference, from the option schema (kbench.options).

    python3 scripts/options_doc.py          # rewrite it
    python3 scripts/options_doc.py --check  # exit 1 when it is stale
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)        # the checkout's kbench, installed or built in place
import kbench.options  # noqa: E402

PAGE = os.path.join(ROOT, "docs", "options.md")

if __name__ == "__main__":
    text = kbench.options.markdown()
    if "--check" in sys.argv[1:]:
        with open(PAGE) as f:
            stale = f.read() != text
        print(f"{PAGE} is {'stale: run scripts/options_doc.py' if stale else 'current'}")
        sys.exit(1 if stale else 0)
    with open(PAGE, "w") as f:
        f.write(text)
