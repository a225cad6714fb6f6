module fencelock.example/fencelock

go 1.19
