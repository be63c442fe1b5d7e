"""autoresearch-mcp: research-driven, statistically honest code optimization over MCP."""

__version__ = "0.1.0"
