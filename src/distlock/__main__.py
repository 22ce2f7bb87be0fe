from distlock.cli import main

main()
