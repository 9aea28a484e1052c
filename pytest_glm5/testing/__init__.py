"""What the tests and the GPU checks build on the spot: the tiny random-weight model (`tinymodel`)."""
