"""``python -m lockgate.archiver``."""

from lockgate.archiver.app import main

if __name__ == "__main__":
    main()
