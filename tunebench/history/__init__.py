"""Results over time: a DuckDB store of every run (`history add`), change points (`history check`), trend charts
(`history report`) and `bisect` between two refs or package versions."""
