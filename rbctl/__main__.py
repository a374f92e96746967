from rbctl.cli import main

main()
