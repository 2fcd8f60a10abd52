"""The app pages, one file each (routed by app/main.py)."""
