from rewardhub_trainer.cli import main

raise SystemExit(main())
