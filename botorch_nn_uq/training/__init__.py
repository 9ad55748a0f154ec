"""The shared training loop, losses and seeding utilities."""
