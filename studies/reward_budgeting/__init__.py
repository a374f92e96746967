"""The reward-budgeting study on rbctl (README.md here): its study file and sweeps (configs/), its own
exact checks (checks.py), the document generators (documents/), MaxRL's published table
(published.py), and the result documents with their figures (docs/)."""
