"""Named project configurations: the service (`service.py`) and secrets at rest (`secrets.py`)."""
