"""Building the installable extension zips and fetching the wheels they bundle."""
