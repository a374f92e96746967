"""Studies built on rbctl: each folder is one research project that uses only rbctl's public API
(its study files, sweeps, document generators and result documents); none of it is in the wheel."""
