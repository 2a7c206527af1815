"""PPO with a recurrent (GRU) policy on CartPole with the velocities hidden, against a feed-forward one."""
