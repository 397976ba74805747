from ccsynth.cli import main

raise SystemExit(main())
