from infoeval.cli import main

main()
