"""``python -m lockgate.console``."""

from lockgate.console.app import main

if __name__ == "__main__":
    main()
