"""The insights page's model: what the rollups say about each tool over a window, laid out
as charts (server-rendered SVG) and tables (`view`), and the sampler that records each
replica's worker pool per minute (`sampler`)."""
