"""What the server tells its operators about itself: Prometheus metrics (`metrics`)."""
