"""Building blocks of the plugin's models (relative attention, stochastic layer stacks)."""
