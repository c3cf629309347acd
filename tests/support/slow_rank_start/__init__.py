"""A sitecustomize that stalls one local rank inside ``Process.start`` (see sitecustomize.py)."""
