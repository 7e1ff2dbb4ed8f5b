from sdk.cli import main

raise SystemExit(main())
