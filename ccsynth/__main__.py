from ccsynth.cli import main

__all__: list[str] = []

raise SystemExit(main())
