module hookrunner.example/gotemplatevectors

go 1.19
