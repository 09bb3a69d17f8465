"""SplashNet (sEMG typing) against the emg2qwerty baseline: data transforms, modules, the Lightning
module, decoding/CER and config each in their own file, as in emg2qwerty."""
