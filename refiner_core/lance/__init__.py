"""Lance access shared by the Lance source and sink: datasets, and fork-isolated calls."""
