"""``python -m streamtable``: the command line."""

from streamtable.cli import main

if __name__ == "__main__":
    main()
