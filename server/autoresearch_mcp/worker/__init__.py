"""The worker runtime: what runs every job, locally and on a cloud worker. Standard library only; this
folder is what ships (it imports nothing else of the server)."""
