"""What every claimer obeys: pause switches, circuit breakers, the protection level and the
claim policy derived from them."""
