"""``python -m lockgate.projector``."""

from lockgate.projector.app import main

if __name__ == "__main__":
    main()
