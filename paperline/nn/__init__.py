"""Neural-network pieces shared by methods (losses, layers)."""
