"""Running Lockgate: settings, the broker's topology, the embedded server and the supervisor."""
