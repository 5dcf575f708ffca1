"""The resident supervisor: owns sessions through leases and drives each one's loop."""
