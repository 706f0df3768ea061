"""nerd: Neural Robot Dynamics on Newton."""
