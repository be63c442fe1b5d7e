from autoresearch_mcp.cli import main

raise SystemExit(main())
