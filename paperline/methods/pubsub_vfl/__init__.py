"""PubSub-VFL: asynchronous two-party split learning over publish/subscribe channels (zmq)."""
